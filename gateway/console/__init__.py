"""The local web console `memgate run` serves on `console.listen`: memory and its versions, history,
chats, jobs, access and status in a browser, every change through the same code as the CLI."""
