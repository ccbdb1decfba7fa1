"""What the rank processes and the coordinator both speak: the wire format, array framing, limits.

Imported by both sides (:mod:`timetravel.torch.rank`, :mod:`timetravel.torch.world`); imports
neither, and never torch.
"""
