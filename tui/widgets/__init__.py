"""One file per cockpit widget; styles live in tui/app.tcss."""
