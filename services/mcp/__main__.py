from zapomni.services.mcp.main import main

main()
