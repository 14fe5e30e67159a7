from zapomni.services.query.main import main

main()
