"""The reference scripts here run in the trainers' own environments, never under pytest."""

collect_ignore = ["llamafactory_reference.py"]
