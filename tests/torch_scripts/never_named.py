raise SystemExit("this script must never run: no command line named it")
