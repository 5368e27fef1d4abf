"""The shared kernel: ids, the error base class, and the API plumbing every door uses (error handler,
pagination, parsers). It imports nothing from the project's apps, so every layer may import it."""
