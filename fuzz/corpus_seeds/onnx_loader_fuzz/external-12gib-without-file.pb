€€€€BWj
locationw.binp