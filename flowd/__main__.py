from flowd.cli import main

raise SystemExit(main())
