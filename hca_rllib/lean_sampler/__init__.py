"""The parts of the lean EnvRunner (`hca_rllib.env_runner.LeanEnvRunner`), one job each.

* `support`: which configs the lean runner can run (`lean_sampler_blocker`), and the
  names of the samplers.
* `observations`: what it does in place of RLlib's env-to-module pieces: flattening
  (`FlattenObservations`) and frame stacking (`FrameStackingEnvToModule`).
* `vector_step`: its own step of a gymnasium `SyncVectorEnv`'s sub-envs.
* `fragment`: one `sample()`'s buffers and per-step bookkeeping (autoresets, the
  episodes that end).
* `episodes`: each env's running episode between fragments, and its chunks as RLlib's
  `SingleAgentEpisode`.
"""
