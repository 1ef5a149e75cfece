"""Example host tools and programs for the sandbox."""
