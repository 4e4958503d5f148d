"""gen.compiling: variants to CUDA sources (render, emit) and sources to cubins (compiler, the public
face: options, compilers and nvcc, verdict, cache, ptxas, deadlines)."""
