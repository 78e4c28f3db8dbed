"""Samplers: :class:`padless.PlanSampler` (ranks, tail, balance, steps, resume), mixtures
of corpora, the keyword shortcuts (``plan_*`` and ``*Sampler``) and the strategy report.
"""
