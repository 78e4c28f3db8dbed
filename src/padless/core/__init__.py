"""Pure values: lengths, fields, plans, schedules, costs, memory, filters, and the small
helpers every layer uses (checks, random streams, state). No file I/O; the compiled
kernels are imported inside the functions that call them.
"""
