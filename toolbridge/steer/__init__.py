"""Steering an answer while it is generated: the policy, its decision points, the logits they move."""
