"""Where users already are: models by Hugging Face id or path (``diagnose hf:...``)."""
