"""`python -m tui` opens the cockpit."""
from tui.app import main

raise SystemExit(main())
