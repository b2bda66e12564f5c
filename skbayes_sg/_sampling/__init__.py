"""Private Cython engine of skbayes_sg.

Three independent axes joined by one oracle interface:

- models (``_models``, ``_glm``): the GLM residual ``phi'(z, y)``;
- data (``_dataset``): dense / CSR rows, float32 / float64, no copies;
- gradient estimators (``_estimators``): candidates ``(S, g_S)``;
- dynamics (``_dynamics``): SGLD, pSGLD, SGHMC steps;
- the chain driver (``_chain``): prior + optional EWSG index chain, nogil loop.
"""
