"""Training and studies (Chapters 7–9): tasks, the torch model, the trainer, grids, results files,
their reproduction, rank statistics, the trained-model reports and Chapter 9's pre-registered study."""
