"""What the lessons run on: the course corpus and tokenizer, tiny models, batches, the training
loop, the shipped checkpoints and the 2-process demo. Built on the core; the core never imports it."""
