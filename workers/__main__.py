from zapomni.workers.main import main

main()
