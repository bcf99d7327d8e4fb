"""The stages: read from where they are defined (catalogue), the form of each stage's settings (settings), and when a costly measurement is due again (measure_due)."""
