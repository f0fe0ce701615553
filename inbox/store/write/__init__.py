"""The commands: the statements that change the inbox's rows."""
