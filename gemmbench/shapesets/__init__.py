"""Built-in shape sets (YAML), installed as package data under gemmbench.shapesets."""
