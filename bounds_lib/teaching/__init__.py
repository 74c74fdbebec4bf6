"""What the book gives its readers beyond the text: the exercises' self-checks
(:mod:`bounds_lib.teaching.exercises`) and the figures a reader moves without a kernel
(:mod:`bounds_lib.teaching.interactive`)."""
