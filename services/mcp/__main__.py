from services.mcp.main import main

main()
