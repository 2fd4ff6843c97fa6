"""Protocol primitives, the bottom layer: errors, canonical codec, CIDs, fixed point,
payloads, the task manifest, timing. Imports nothing else of the project."""
