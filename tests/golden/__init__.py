"""Golden arrays from Hugging Face transformers, the script that makes them, and test helpers."""
