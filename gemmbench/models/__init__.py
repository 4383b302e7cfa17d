"""Models as the engines see them: shape sets (YAML), Hugging Face config.json families, and the sharding rules that
give one GPU's GEMMs."""
