"""What a model call costs in US dollars.

`prices.cost` prices one call's tokens: an operator's override for the model
id (`overrides`, the admin's "Model prices"), else Pydantic's `genai-prices`
table for the providers' public models, else unknown (None, never 0).
"""
