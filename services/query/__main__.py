from services.query.main import main

main()
