"""Selection statistics (split by the layout work)."""
