"""Sessions, memory files, token counting and consolidation. Imports neither `gateway` nor `channels`."""
