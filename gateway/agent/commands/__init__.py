"""Chat commands: the registry every `/help` and menu is made from, and the commands the agent
answers itself outside a turn (`/new`, `/stop`, `/status`, `/memory`, `/forget`, ...)."""
