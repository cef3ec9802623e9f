"""MIG domain: profile names, layout geometry, mig-parted configs and applying them."""
