"""A/B experiments at run time: enrollment when a session is created (`enrollment`), the
variant's overrides on every turn (`enrollment.overrides`), one sample per settled turn
(`samples`) and the statistics of the results (`results`)."""
