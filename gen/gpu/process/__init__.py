"""What runs inside the GPU worker: the jobs it is handed, and how it checks and times them."""
