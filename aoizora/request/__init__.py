"""A served request end to end: the text encoder (:mod:`.text_encoder`) and the whole clip's
plan and latency (:mod:`.clip_plan`: the denoising step's plan plus the VAE decoder's).

Nothing is imported here, so the command line can check a text encoder's time before
jax starts."""
