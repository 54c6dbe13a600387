"""`python -m appliance.bfcl SRC_DIR [PACK_DIR]`: rebuild the BFCL pack from the upstream files."""
from appliance.bfcl.importer import main

raise SystemExit(main())
