"""Skills: folders with a SKILL.md the model reads when a task needs it (front matter, catalog,
the prompt's list of them). Below the tools and the agent, which both use it."""
