"""The prompt: a stock chat template made tool-capable (the prelude), and the templates themselves."""
