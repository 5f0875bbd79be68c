"""The LLM judge: one module for every suite."""
