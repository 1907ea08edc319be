"""A second approver: which calls a rule holds, where approval requests live, and the approval page."""
