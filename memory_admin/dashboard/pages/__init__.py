"""The dashboard's pages, one module per page group; the menu and each group's access rule are dashboard/nav.py."""
