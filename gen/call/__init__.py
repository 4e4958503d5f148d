"""What runs a tuned kernel in the user's program: gen.kernel, gen.matmul, gen.tuned."""
