/* sim/blas.h -- OpenBLAS's kernels: run on the best ones this CPU has, when the library's own
 * choice fell short and the user made none.
 */
#ifndef SIM_BLAS_H
#define SIM_BLAS_H

/* Call first in main, with main's argv. OpenBLAS picks its kernels once, as it loads: those named
 * by OPENBLAS_CORETYPE if it is set, else those of the CPU model it recognizes, else old SSE3 ones
 * ("Prescott") for a CPU newer than the library. When the variable is unset and the kernels in
 * use lack the vector units the CPU has (AVX-512, or AVX2 with FMA), this sets the variable to the
 * kernels of those units and executes the program again (the only way: the variable is read at
 * load). It returns when nothing is to be done, or when exec fails (the run goes on, slower). */
void sim_blas_kernels(char **argv);

/* The kernels OpenBLAS runs, e.g. "SkylakeX". */
const char *sim_blas_corename(void);

#endif /* SIM_BLAS_H */
