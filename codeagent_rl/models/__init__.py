"""Models: decoder transformer, actor and critic, sampler, tokenizer."""
