"""One file per cockpit screen; styles live in tui/app.tcss."""
