"""Suites: files and API bodies resolved into hashed criteria, and the criteria in the store."""
