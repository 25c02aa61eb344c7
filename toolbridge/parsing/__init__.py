"""Reading calls out of model text, streamed or whole, in every dialect."""
