from relaxbench.cli import main

raise SystemExit(main())
