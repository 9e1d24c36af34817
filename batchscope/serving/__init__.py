"""Serving what-if: static against continuous batching, simulated from a sweep's step times.

``step_time`` fits T(batch, context) from a finished report, ``requests`` makes the request
stream, ``simulator`` serves it under each policy, ``metrics`` summarises what users ask of a
server (throughput, TTFT, TPOT, goodput under an SLO) and ``whatif`` runs the grid of
policies, batch caps and request rates behind ``diagnose serve``.
"""
