from appliance.cli import main

raise SystemExit(main())
