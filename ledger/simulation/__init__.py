"""Policy simulation: replaying recorded journals under budget policies in memory, and its picture."""
