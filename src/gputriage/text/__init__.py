"""Text at the bottom of every reader: numbers and lines read strictly, a paste's lines and
who claimed each, prompt commands, byte units, and text made safe for a terminal."""
