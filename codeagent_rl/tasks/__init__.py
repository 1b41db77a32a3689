"""Task schema and JSONL io (synthetic and HumanEval loaders arrive later)."""
