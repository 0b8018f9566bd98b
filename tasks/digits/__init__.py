"""Handwritten digits with one example per client: paper 000's (cpSGD) learning experiment."""
