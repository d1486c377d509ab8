"""The training engine: one run, single or seed-parallel, as a LightningModule trained by Lightning's Trainer.

A single run: ``run`` (build, train, write the row), ``run_folder`` (its folder, lock and row),
``module`` (``EmergenceModule``), ``training`` (the one step, and the ``Trainable`` protocol it needs of
a module), ``run_losses`` (the losses kept on the device), ``curriculum``, ``model``
(``SequenceModel``), ``optim``, ``trainer`` (the Trainer factory) and ``resume_point`` (where a
stopped run or group goes on from). Seed-parallel: ``seed_parallel`` (a group's training, its entry
point), ``seed_stack``, ``seed_views``, ``group_stop``, ``batching_probe`` and ``batching``,
described below. Import each from its module: the package imports none of them, so that importing
one (the seed stack, which ``speed`` times) loads no more than it needs.

Seed-parallel training: K seeds of one config as one LightningModule, trained by the suite's Trainer.

``SeedStack`` holds the K seeds' parameters stacked along a new leading dim ([K, ...]); one
forward over all of them is ``torch.func.vmap`` of ``functional_call`` on a template SequenceModel, so
K small models become one model with K times larger ops. It is trained by ``build_trainer``, the
Trainer of a single run, so every Lightning hook fires as it does there. What stays per seed:

- initialisation: seed k's model is built exactly as ``emergence_bench.engine.run.run`` builds it
  (``L.seed_everything(seed)``, then the task, then the model), then copied into slice k;
- data: slice k of train batch i is ``task_k.batch("train", i)`` (the seed's own stream); the eval
  set is shared by every seed, as it is equal in sequential runs;
- the step and evals: ``emergence_bench.engine.training.step`` (a run's step, here over [K] losses) and
  ``EvalTally`` of ``emergence_bench.engine.module`` (its torchmetrics one per seed);
- gradient clipping: ``configure_gradient_clipping`` scales each seed's gradients by its own global
  norm (``clip_grad_norm_`` on slice k alone);
- optimiser state: one AdamW over the stacked tensors *is* K AdamWs, because AdamW is elementwise;
  the lr schedule is a function of the step, so it is shared;
- losses: kept on the device (the run's ``LossBuffer``), [2, K] per step, and read back for every
  seed at once every ``log_every`` steps (one host sync), as a single run reads its own;
- NaN: a seed whose loss became non-finite ends as ``diverged`` at the read after it, naming the
  step, as a run alone does (until then its NaN stays in its own slice). A finished seed keeps its
  slot until the group ends: it is still computed, with zero gradients, and nothing of it reaches
  the others;
- callbacks and rows: each seed has its own callback instances and run folder, built as ``run()``
  builds them. The Trainer's one callback, ``SeedCallbacks``, fans every hook out to every live
  seed's callbacks with that seed's views: ``SeedView`` as ``pl_module`` (the MeasuredModule
  contract of callbacks/contract.py; its ``model`` holds seed k's weights and gradients as of now)
  and ``SeedTrainer`` as ``trainer`` (the shared Trainer with the seed's logger, folder and stop
  flag). A callback error ends its seed only, as ``failed``; a callback that sets ``should_stop``
  ends its seed alone, before the next step. Each seed writes ``out/<run_id>/result.json`` with the
  schema and run id of a sequential run, plus ``"seed_parallel": {"k": K, "group": [run ids]}``;
- resume points: the group's (``resume_point``) keeps every slot, an ended seed's included, so a
  group that goes on from one trains each seed to the bits it would have had in one piece.

Hooks get seed k's slice of what they are passed (the batch, the loss); those about the optimiser
get the shared optimiser. Timings in each row are those of the shared step. ``trainer.compile``
does not apply: the batched step runs eagerly.

Mixers whose forward cannot be vmapped (a custom ``autograd.Function`` without vmap support, a GPU
kernel, randomness) are found by a trial forward and backward (``seed_parallel_supported``); their
seeds, and those of a config with a curriculum, run one after another through ``run()`` with
``"seed_parallel": {"k": 1, "fallback": reason}``.

By concern: ``seed_parallel`` (``run_seed_parallel``, and the batching modes by which a group
chooses), ``seed_stack`` (the batched module and the group's data: it is given the live-seed mask and
the stacked biases, and reports reads and evals to listeners), ``seed_views`` (each seed's views and
callbacks, the fan-out, and each seed's state in a resume point), ``group_stop`` (the ``GroupStop``
protocol by which a tuning's pruning, a tool above the engine, ends a group early), ``batching_probe``
(whether a model vmaps, and whether batching pays) and ``batching`` (vmap rules for ops without one).
"""
