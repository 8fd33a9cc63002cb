"""Building blocks of the discrete-event simulator (simpy processes, link, batch state)."""
