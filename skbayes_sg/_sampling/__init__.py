"""Private engine of skbayes_sg (Cython kernels and the Python that drives them).

Four independent axes meet in one oracle interface (``_oracle``'s
``GradientOracle``; :class:`._chain.ChainOracle` joins them): a chain is any
model, with any gradient estimator, moved by any dynamics, in any metric.

- models (``_models``, ``_glm``): the GLM residual ``phi'(z, y)`` per datum,
  picked by an integer (no virtual call), the model's own parameters a
  short vector beside it;
- gradient estimators (``_estimators``; the row noise model in
  ``_registry``): candidates ``(S, g_S)`` over ``_dataset``'s dense or CSR
  rows, float32 or float64, never copied;
- dynamics (one file each in ``samplers/``: definition, automatic rules,
  error model, Metropolis form, builder; the Cython classes in
  ``_dynamics``, lazy O(nnz) steps for sparse rows in ``_lazy``): SGLD,
  pSGLD, SGHMC, SG-HMC leapfrog, ULD, BAOAB, SGNHT;
- metrics (``_metric``; the low-rank spectrum in ``_spectrum``): identity,
  diagonal, dense or low-rank-plus-diagonal whitening ``theta = c + L z``.

Around them: the names, constraints and documentation of every sampler and
subsampling (``_specs``) and the registries built from them
(``_registry``); the fit's set-up (``_context``: data and mode, with its
curvature in ``_curvature``, its noise model in ``_row_noise`` and their row
algebra in ``_row_algebra``);
the error model that sets steps and batches (``_error_model``); the chain
driver (``_chain``: prior, EWSG index chain, nogil loop), the runner of
chains as picklable tasks (``_runner``) and the schedule of warm-up and
sampling rounds (``_schedule``); the draws' store (``_draws``).  Small
kernels: blocks of normals (``_normal_stream``), Ctrl-C inside nogil loops
(``_interrupt``), CSR Grams and row forms for the set-up
(``_sparse_forms``), and the network's fused CPU step (``_flat_dynamics``).
"""
